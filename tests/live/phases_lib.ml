(* phases_lib.ml — tests/live program (see phases.ml) linked with the flamme
   library: Flamme.start ~period drives the continuous profile.
   Usage: phases_lib.exe SECS OUTPUT PERIOD HZ *)
let () =
  let secs = float_of_string Sys.argv.(1) in
  Flamme.start ~output:Sys.argv.(2) ~period:(float_of_string Sys.argv.(3))
    ~hz:(int_of_string Sys.argv.(4)) ();
  Phases.run secs;
  Flamme.stop ()
