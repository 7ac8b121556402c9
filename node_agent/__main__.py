"""``python -m node_agent ...`` is ``vcemu agent ...``."""

import sys

from node_agent.cli import agent_main

sys.exit(agent_main(sys.argv[1:]))
