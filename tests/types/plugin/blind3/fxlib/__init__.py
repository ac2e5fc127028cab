"""Shared effects and small library functions used across the corpus."""

from fxlib.decls import ROW, Config, acts, bn, config, depth, dropout, losses, lr, mode, params, scale, steps, temperature, total, verbose

__all__ = ["ROW", "Config", "acts", "bn", "config", "depth", "dropout", "losses", "lr", "mode", "params", "scale", "steps", "temperature", "total", "verbose"]
