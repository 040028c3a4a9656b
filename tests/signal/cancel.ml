(* cancel.ml — tests/signal program, also run by tests/torture (agent
   preloaded, wall mode): threads cancelled inside a blocking call the agent
   interposes, and a blocking call made by a signal handler while the thread
   waits in another.
   Usage: cancel.exe ROUNDS NESTED_SECONDS
   Prints "cancel: rounds done" then "nested: woken: true" (SIGUSR1 did
   interrupt the outer wait).
   torture-libs: *)

external run : int -> unit = "cancel_run"
external nested : float -> int = "cancel_nested"

let () =
  run (int_of_string Sys.argv.(1));
  print_endline "cancel: rounds done";
  Printf.printf "nested: woken: %b\n" (nested (float_of_string Sys.argv.(2)) > 0)
