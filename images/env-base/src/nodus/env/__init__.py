"""nodus-env: the grader CLI inside every Environment image (tasks, grade, info). Imports nothing else of nodus."""
