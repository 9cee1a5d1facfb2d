"""attnlab: the shared library of *Solvable Attention*.

Attention variants, tasks, trainers and theory solvers for three solvable models of attention.
Each chapter of the book imports what it needs from here.
"""

__version__ = "0.2.0.dev0"
