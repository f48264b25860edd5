"""Tools that read a compiled model and the simulator's traces: `report`
(one self-contained HTML page) and `validate` (metrics of the generated C
on a dataset). They sit beside sim/ and never inside ops/."""
