(* phases_main.ml — tests/live program (see phases.ml), profiled from
   outside (LD_PRELOAD, FLAMME_PERIOD). Usage: phases_main.exe SECS [IDLE]:
   the phases, then IDLE seconds asleep (a program that waits, its current
   segment unchanged meanwhile). *)
let () =
  Phases.run (float_of_string Sys.argv.(1));
  if Array.length Sys.argv > 2 then Unix.sleepf (float_of_string Sys.argv.(2))
