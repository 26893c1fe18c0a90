"""FireFeed: keeps product feeds fresh for many companies at once."""

__version__ = "0.1.0"
