(* phases_lib.ml — tests/live program (see phases.ml) linked with the flamme
   library: Flamme.start ~period drives the continuous profile; with OUTPUT
   "-" the program never starts one (flamme attach does, from outside).
   Usage: phases_lib.exe SECS OUTPUT PERIOD HZ *)
let () =
  let secs = float_of_string Sys.argv.(1) in
  if Sys.argv.(2) = "-" then Phases.run secs
  else begin
    Flamme.start ~output:Sys.argv.(2) ~period:(float_of_string Sys.argv.(3))
      ~hz:(int_of_string Sys.argv.(4)) ();
    Phases.run secs;
    Flamme.stop ()
  end
