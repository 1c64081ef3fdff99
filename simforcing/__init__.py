"""SimForcing: real-domain robot video world models distilled from a frozen simulation world model."""

__version__ = "0.1.0"
