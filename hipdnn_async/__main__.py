"""``python -m hipdnn_async`` is the ``hipdnn-async`` command."""
import sys

from .cli import main

sys.exit(main())
