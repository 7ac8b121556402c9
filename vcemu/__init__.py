"""Generated wire code lives in vcemu.v1 (built from proto/vcemu/v1 by setup.py; not committed)."""
