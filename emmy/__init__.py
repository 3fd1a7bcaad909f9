"""Emmy: a compiler from PyTorch models to CUDA, built on xDSL.

Dependencies flow one way: dialects -> analysis -> passes -> tuning/backend -> cli.
"""

__version__ = "0.1.0"
