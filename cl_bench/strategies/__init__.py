"""The methods, one module each (the class a built-in card's ``strategy:`` names), and
their building blocks in :mod:`cl_bench.strategies.blocks`."""
