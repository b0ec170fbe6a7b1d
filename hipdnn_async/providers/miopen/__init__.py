"""The MIOpen provider (AMD GPUs, ``"hip:N"``): see ``_provider.py`` and ``_plans.py``."""
from ._provider import MIOPEN_ENGINE_NAME, MiopenEngine, MiopenProvider

__all__ = ["MiopenProvider", "MiopenEngine", "MIOPEN_ENGINE_NAME"]
