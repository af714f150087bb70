"""Finding the model's answer in a completion: the text of its last `<answer>...</answer>`.

Who uses it: the reasoning-gym adapter and the catalog environments (`from nodus.env.answers import
last_answer`). Two linear scans instead of one `<answer>(.*?)</answer>` regex: that regex is quadratic on
a completion full of opening tags (minutes for a few hundred kilobytes), which would turn a junk reply into
a grading timeout instead of a verdict.
"""

from __future__ import annotations

import re
from collections import deque

OPEN_TAG = re.compile(r"<answer>", re.IGNORECASE)
CLOSE_TAG = re.compile(r"</answer>", re.IGNORECASE)


def last_answer(completion: str) -> str | None:
    """The text inside the last complete `<answer>...</answer>` (tags in any case), or None."""
    last_close = deque(CLOSE_TAG.finditer(completion), maxlen=1)
    if not last_close:
        return None
    last_open = deque(OPEN_TAG.finditer(completion, 0, last_close[0].start()), maxlen=1)
    if not last_open:
        return None
    first_close = CLOSE_TAG.search(completion, last_open[0].end())
    assert first_close is not None  # the last closing tag itself comes after this opening tag
    return completion[last_open[0].end() : first_close.start()]
