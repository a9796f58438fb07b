"""solforge: measure GPU kernels against the hardware's speed of light, and forge faster ones."""

__version__ = "0.1.0"
