(* errors.ml — tests/lib program: the misuse cases of the Flamme API, one
   output line each ("CASE: ok|raised MESSAGE"), then a profile left running
   at exit, which the library's at_exit handler must complete.
   Usage: errors.exe DIR   (profiles are written into DIR) *)

let try_ name f =
  match f () with
  | () -> Printf.printf "%s: ok\n%!" name
  | exception (Flamme.Error msg as e) ->
      Printf.printf "%s: raised %s | %s\n%!" name msg (Printexc.to_string e)

let () =
  let dir = Sys.argv.(1) in
  let p name = Filename.concat dir name in
  try_ "first-start" (fun () -> Flamme.start ~output:(p "first.flm") ());
  try_ "second-start" (fun () -> Flamme.start ~output:(p "second.flm") ());
  Printf.printf "running-after-second: %b\n" (Flamme.is_running ());
  try_ "first-stop" Flamme.stop;
  try_ "stop-again" Flamme.stop;
  try_ "bad-path" (fun () -> Flamme.start ~output:(p "no-such-dir/x.flm") ());
  Printf.printf "running-after-bad-path: %b\n" (Flamme.is_running ());
  try_ "bad-hz" (fun () -> Flamme.start ~hz:0 ~output:(p "hz.flm") ());
  try_ "restart" (fun () -> Flamme.start ~output:(p "restart.flm") ());
  try_ "restart-stop" Flamme.stop;
  try_ "bad-alloc" (fun () -> Flamme.start ~alloc:0. ~output:(p "alloc0.flm") ());
  Printf.printf "running-after-bad-alloc: %b\n" (Flamme.is_running ());
  (* OCaml before 5.3 has no Gc.Memprof: one clear Error, nothing left running. *)
  Printf.printf "ocaml-memprof: %b\n" (Sys.ocaml_release.major > 5 || Sys.ocaml_release.minor >= 3);
  try_ "alloc-start" (fun () -> Flamme.start ~alloc:1e-4 ~output:(p "alloc.flm") ());
  Printf.printf "running-after-alloc: %b\n" (Flamme.is_running ());
  if Flamme.is_running () then try_ "alloc-stop" Flamme.stop;
  (* Left running: at_exit must stop it and complete the file. *)
  try_ "at-exit-start" (fun () -> Flamme.start ~hz:499 ~output:(p "atexit.flm") ());
  Printf.printf "exiting %d\n" (Work.burn (Sys.time () +. 0.3) land 1)
