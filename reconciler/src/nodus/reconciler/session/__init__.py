"""The job session: what runs beside a trainer wherever it runs (a local supervisor, a Ray node).

Who uses it: the executors (the local supervisor today) drive a `JobSession`; the controllers and views read a
summary's platform keys from `summary`. It knows nothing of how a trainer's process was started or where its
folders are, and imports no executor (an import-linter contract says so). Modules, from the bottom up:

    environment  EnvironmentSpec: the Environment a job grades against and which tasks its trainer gets
    summary      the platform's tally of the gradings into a run's summary and diagnostics
    cost         money (usd, parse_usd) and the CostMeter: running time times price, the cap
    attempt_api  the attempt API on a Unix socket: tasks (never answers), gradings, events
    sink         SessionSink, where a session's reports go, and MemorySink
    status       JobStatus: the status document, written whole through the sink
    session      JobSession: the attempt API, grading, cost and cap, the tally, as one component
"""
