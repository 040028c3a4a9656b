# mk/heapfill.mk — heap-fill allocation sampling of unmodified binaries
# (owner: the heap-fill parts of runtime_hooks/gc_hooks.c and agent/alloc.c,
# tests/alloc/test_heapfill.py, bench/heapfill_*). bench-heapfill builds its
# programs itself (bench/heapfill_bench.py, with both OCaml 5.3 compilers)
# and compares heap fill with Gc.Memprof, function by function.
.PHONY: bench-heapfill
bench-heapfill: $(BUILD)/flamme $(BUILD)/libflamme.so
	OCAMLOPT="$(OCAMLOPT)" FLAMME_MAKE="$(MAKE)" python3 bench/heapfill_bench.py --build $(BUILD) --cache $(FLAMME_CACHE)
BENCH_TARGETS += bench-heapfill
HELP_LINES += "make bench-heapfill  --alloc of an unmodified binary (heap fill) vs Gc.Memprof, by function"
