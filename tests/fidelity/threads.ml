(* tests/fidelity/threads.ml — systhreads inside domains: two domains (the
   main one and a spawned one), each running three systhreads that compute
   and hand the domain lock to each other (Thread.yield). Checked by test_fidelity.py:
   stacks of every thread reach their root; samples on several systhreads.
   Usage: threads.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))

let[@inline never] grind seed =
  let acc = ref seed in
  for i = 1 to 100_000 do
    acc := (!acc * 7) + i
  done;
  !acc

let[@inline never] thread_body id () =
  let acc = ref id in
  for _ = 1 to scaled 3_000 do
    acc := grind !acc;
    Thread.yield ()
  done;
  ignore (Sys.opaque_identity !acc)

let[@inline never] domain_body base () =
  let ts = List.init 3 (fun i -> Thread.create (thread_body (base + i)) ()) in
  List.iter Thread.join ts

let () =
  let d = Domain.spawn (domain_body 10) in
  domain_body 0 ();
  Domain.join d;
  Printf.printf "threads: cpu %.3f\n" (Sys.time ())
