(* phases.ml — tests/top program: a run whose hot function changes while
   flamme top watches it. [phase_a] (an FNV-style integer hash loop) runs
   for SECS seconds of wall-clock time on the main thread, then [phase_b]
   (float arithmetic through a [@@noalloc] external, an Atomic counter of
   rounds) for SECS more in a second domain while the main thread waits in
   Domain.join: each is the leaf of nearly all samples of its phase, and
   each thread has its own.
   Prints one line per phase change and exits 3 (flamme top must return the
   program's own status).
   Usage: phases.exe SECS *)

let now () = Unix.gettimeofday ()

let[@inline never] phase_a until =
  let h = ref 0 in
  while now () < until do
    for i = 1 to 2_000_000 do
      h := (!h lxor i) * 0x100000001b3 land max_int
    done
  done;
  !h

external sqrt_noalloc : float -> float = "caml_sqrt_float" "sqrt" [@@unboxed] [@@noalloc]

let acc = Atomic.make 0

let[@inline never] phase_b until =
  let x = ref 1.0 in
  while now () < until do
    for _ = 1 to 200_000 do
      x := sqrt_noalloc (!x +. 2.0) *. 1.0000001
    done;
    Atomic.incr acc
  done;
  int_of_float !x + Atomic.get acc

let[@inline never] main secs =
  let t0 = now () in
  print_endline "phases: a";
  let a = phase_a (t0 +. secs) in
  print_endline "phases: b";
  let b = Domain.join (Domain.spawn (fun () -> phase_b (t0 +. (2. *. secs)))) in
  Printf.printf "phases: done %d\n%!" ((a + b) land 1);
  exit 3

let () = main (float_of_string Sys.argv.(1))
