"""dlsched: profiling and graph analysis for distributed deep-learning training."""
__version__ = "0.1.0"
