"""nodus runtimes: trainer entrypoints that talk to the platform only through the attempt API."""
