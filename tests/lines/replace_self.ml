(* tests/lines/replace_self.ml — linked before tests/e2e/split.ml: moves the
   file named by REPLACE_SELF_WITH over the program's own executable before
   any work, as a rebuild does to a program that is still running. Alone, it
   is the other program that replaces it. *)
let () =
  match Sys.getenv_opt "REPLACE_SELF_WITH" with
  | Some p -> Sys.rename p Sys.executable_name
  | None -> ()
