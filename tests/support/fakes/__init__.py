"""Fake command-line tools for the deploy tests, each a program of its own (``python fakes/NAME.py ARGS``) that
``support.deploy_harness.tool_dir`` puts on a test's PATH under the real tool's name."""
