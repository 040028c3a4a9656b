(* short.ml — tests/signal program (agent preloaded): N threads, one after
   the other, each burning SECONDS of CPU, less than a sampling period.
   Usage: short.exe N SECONDS   Prints "short: done". *)

external run : int -> float -> unit = "short_run"

let () =
  run (int_of_string Sys.argv.(1)) (float_of_string Sys.argv.(2));
  print_endline "short: done"
