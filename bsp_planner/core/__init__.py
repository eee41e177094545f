"""Shared ground of every wing: the input error, the registry of named parts, atomic writes, output locks and
leftovers, signal handling, the step types a run shares and the stressor names stress-ng knows. Imports nothing
else of the package."""
