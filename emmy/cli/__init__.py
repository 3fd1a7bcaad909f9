"""Emmy's command line: the only place that reads argv or the environment."""
