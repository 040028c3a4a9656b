(* raises.ml — tests/lib program: Flamme.with_profile around a function that
   raises after about 0.5 s of CPU. The exception must leave the program
   uncaught (exit status 2, "Fatal error: exception Failure(...)"), with the
   backtrace of the original raise (run with OCAMLRUNPARAM=b), and the
   profile must be complete.
   Usage: raises.exe OUTPUT HZ *)

let[@inline never] boom () =
  let r = Work.burn (Sys.time () +. 0.5) in
  if r >= 0 then failwith "boom from inside the profile";
  r

let () =
  let output = Sys.argv.(1) and hz = int_of_string Sys.argv.(2) in
  let r = Flamme.with_profile ~hz ~output boom in
  Printf.printf "unreachable %d\n" r
