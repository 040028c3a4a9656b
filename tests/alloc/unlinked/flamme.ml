(* tests/alloc/unlinked/flamme.ml — a stand-in for the flamme library that
   does nothing: tests/alloc/split.ml built with it is an unmodified program
   (no flamme code, no C stubs), profiled by `flamme record --alloc` under
   LD_PRELOAD alone (tests/alloc/test_heapfill.py). *)
let start ?output ?alloc ?live () = ignore (output, alloc, live)
let stop () = ()
let is_running () = false
