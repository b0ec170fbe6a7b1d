"""``python -m hipdnn_async.demo``: the same as ``hipdnn-async demo``."""
from . import main

raise SystemExit(main())
