"""kiln's tests. A package, as are the area folders (compiler, models, simulator, firmware),
so pytest puts the checkout's root on sys.path and a shared module is imported by its full
name from the area it belongs to (`from tests.compiler.helpers import compare_steps`);
same-named modules of two areas (each area's helpers.py) never collide."""
