"""Re-exports of the library's effects and functions."""

from .lib import counted as counted, scaled as scaled, steps as steps, temperature as temperature
