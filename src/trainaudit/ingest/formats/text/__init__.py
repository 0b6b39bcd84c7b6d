"""Any text log, read by the format-agnostic extractor: the line reader (``lines``) and the bulk
path that reads a chunk of lines of one shape at a time (``bulk``), with the same result."""
