"""The job session: what runs beside a trainer wherever it runs (its tally of the gradings into the summary).

Who uses it: the executors (the local supervisor today), and the controllers and views that read a summary's
platform keys. It knows nothing of how a trainer's process was started or where its folders are, and imports no
executor.
"""
