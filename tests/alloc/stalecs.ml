(* tests/alloc/stalecs.ml — a program OCaml 5.3's Memprof hands callstacks
   the minor GC has already reclaimed (tests/alloc/test_alloc.py,
   test_stale_callstack).

   The main domain allocates 300-word arrays (directly in the major heap,
   so Memprof keeps each sampled one's callstack off the heap until the
   callback), four OCaml frames deep, under Flamme's allocation profile; a
   second domain, spawned before Flamme.start and so not profiled, fills
   its minor heap as fast as it can. Each of its minor collections stops
   every domain: run with a small minor heap (OCAMLRUNPARAM=s=1k), one
   lands between the runtime's copy of a callstack to the minor heap and
   its allocation of the record that names it, dozens of times a run.
   Run: stalecs.exe OUT.flm RATE ARRAYS; prints "arrays N" at the end. *)

let stop = Atomic.make false
let sink = Array.make 8 (Obj.repr 0)

(* Each block is stored where the optimiser cannot see it dead. *)
let[@inline never] store i v = Array.unsafe_set sink (i land 7) (Obj.repr v)

let[@inline never] churn () =
  let i = ref 0 in
  while not (Atomic.get stop) do
    store !i (ref !i);
    incr i
  done

let made = ref 0

let[@inline never] arrays n =
  for i = 1 to n do
    store i (Array.make 300 i);
    incr made
  done

(* Four frames at the allocation: arrays, batch, the entry, caml_program. *)
let[@inline never] batch n =
  arrays n;
  Sys.opaque_identity ()

let () =
  let out = Sys.argv.(1) and rate = float_of_string Sys.argv.(2) in
  let n = int_of_string Sys.argv.(3) in
  let d = Domain.spawn churn in
  Flamme.start ~output:out ~alloc:rate ();
  batch n;
  Flamme.stop ();
  Atomic.set stop true;
  Domain.join d;
  Printf.printf "arrays %d\n" !made
