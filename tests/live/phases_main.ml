(* phases_main.ml — tests/live program (see phases.ml), profiled from
   outside (LD_PRELOAD, FLAMME_PERIOD). Usage: phases_main.exe SECS *)
let () = Phases.run (float_of_string Sys.argv.(1))
