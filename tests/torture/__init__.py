"""The randomized differential tester: see run.py and docs/torture.md."""
