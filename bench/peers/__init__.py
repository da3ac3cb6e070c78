"""The systems bench/compare.py puts side by side, one module each (board,
rabbit, redis_streams), with one function per workload. Every function
creates its own queue or stream, measures, deletes it and returns its
figures as a dict (``msgs_per_s``, or ``p50_ms`` and ``p99_ms``, plus
facts such as how many messages it moved). ``servers`` starts and stops the
throw-away servers; ``common`` holds what the modules share."""
