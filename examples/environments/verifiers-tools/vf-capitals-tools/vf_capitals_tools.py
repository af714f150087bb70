"""A classic verifiers (0.3) tool-calling environment: look up a country's capital with a tool, then answer.

The tools are this module's functions; verifiers builds their JSON schemas from the signatures and docstrings,
and nodus offers them to the model through its chat template. The model calls one with a
<tool_call>{"name": ..., "arguments": {...}}</tool_call> block; the result comes back as a tool message; a reply
without a call ends the episode and is scored: the answer inside <answer></answer> must be the capital.
"""

import verifiers as vf
from datasets import Dataset

CAPITALS = {
    "France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima", "Norway": "Oslo",
    "Egypt": "Cairo", "Canada": "Ottawa", "Chile": "Santiago", "Ghana": "Accra", "Nepal": "Kathmandu",
    "Poland": "Warsaw", "Spain": "Madrid", "Sweden": "Stockholm", "Thailand": "Bangkok", "Turkey": "Ankara",
    "Vietnam": "Hanoi", "Austria": "Vienna", "Cuba": "Havana", "Greece": "Athens", "Iran": "Tehran",
    "Mali": "Bamako", "Oman": "Muscat", "Qatar": "Doha", "Fiji": "Suva", "Laos": "Vientiane",
}
SYSTEM = "Use the lookup_capital tool to find the capital, then reply with it inside <answer></answer>."


def lookup_capital(country: str) -> str:
    """Look up the capital city of a country.

    Args:
        country: The country's English name, e.g. "France".
    """
    capital = CAPITALS.get(country.strip().title())
    return capital if capital is not None else f"no capital known for {country!r}"


def load_environment() -> vf.Environment:
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def correct_capital(completion, answer, parser) -> float:
        found = parser.parse_answer(completion)
        return 1.0 if found is not None and found.strip().lower() == answer.lower() else 0.0

    rows = [{"question": f"What is the capital of {c}?", "answer": a} for c, a in CAPITALS.items()]
    split = len(rows) - 5
    return vf.ToolEnv(
        dataset=Dataset.from_list(rows[:split]),
        eval_dataset=Dataset.from_list(rows[split:]),
        tools=[lookup_capital],
        max_turns=3,
        system_prompt=SYSTEM,
        parser=parser,
        rubric=vf.Rubric(funcs=[correct_capital], parser=parser),
    )
