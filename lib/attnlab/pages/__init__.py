"""Presentation: committed results turned into the tables and figures of one page.

One module per page or part (:mod:`.phase_transition`, :mod:`.in_context_recipe`, ...). These
modules read results (:func:`attnlab.experiments.load_result`) and build what a page shows; they
train nothing. The pages import them; the experiments and the models never do
(``tests/test_library_shape.py`` checks it).
"""
