(* tests/lib/heaptrim_start.ml — linked before tests/e2e/heaptrim.ml to
   profile that program through the library: when HEAPTRIM_PROFILE names a
   file, profiling starts at this module's initialisation (before the
   churn) and stops at exit. *)
let () =
  match Sys.getenv_opt "HEAPTRIM_PROFILE" with
  | Some prof ->
      Flamme.start ~hz:499 ~output:prof ();
      at_exit Flamme.stop
  | None -> ()
