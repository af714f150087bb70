"""`python -m nodus.env` runs the `nodus-env` CLI."""

from nodus.env.cli import main

raise SystemExit(main())
