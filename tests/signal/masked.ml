(* masked.ml — tests/signal program (agent preloaded): C code burns CPU
   with every signal blocked, then the same time with none; the periods
   that passed while the sample signal was blocked must still count.
   Usage: masked.exe SECONDS   Prints "masked: done". *)

external run : float -> unit = "masked_run"

let () =
  run (float_of_string Sys.argv.(1));
  print_endline "masked: done"
