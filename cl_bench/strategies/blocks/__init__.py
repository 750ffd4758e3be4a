"""What the methods are built from: the per-task template, full fine-tuning of a copy,
prompt and adapter templates inside the shared ViT, first-session adaptation,
prototype heads, LuCA modules and the ridge solver. A method's own module sits one
level up, in :mod:`cl_bench.strategies`."""
