(* jumpout.ml — tests/signal program (agent preloaded): C code that leaves
   a wait by siglongjmp from a SIGALRM handler, then burns CPU
   (jumpout_stubs.c). The agent, which named the wait in the thread's slot
   to sample the signal it held back there, must not take the burning that
   follows for the wait.
   Usage: jumpout.exe ROUNDS SECONDS   Prints "jumpout: N of ROUNDS jumped". *)

external run : int -> float -> int = "jumpout_run"

let () =
  let rounds = int_of_string Sys.argv.(1) in
  let n = run rounds (float_of_string Sys.argv.(2)) in
  Printf.printf "jumpout: %d of %d jumped\n" n rounds
