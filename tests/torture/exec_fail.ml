(* exec_fail.ml — Unix.execv of a program that does not exist fails (ENOENT);
   the program goes on working in [after_failed_exec], which the profile
   must still see (profiling resumes after a failed exec), then execs
   /bin/echo for real: the profile ends there, complete, saying exec.
   torture-libs: unix *)
let[@inline never] before_exec n =
  let acc = ref 1 in
  for i = 1 to n do acc := (!acc * 7 + i) land 0xffffff done;
  !acc

let[@inline never] after_failed_exec n =
  let acc = ref 2 in
  for i = 1 to n do acc := (!acc * 11 + i) land 0xffffff done;
  !acc

let () =
  Printf.printf "before: %d\n%!" (before_exec 50_000_000);
  (try Unix.execv "/nonexistent/flamme-torture" [| "x" |]
   with Unix.Unix_error (e, _, _) -> Printf.printf "exec failed: %s\n%!" (Unix.error_message e));
  Printf.printf "after: %d\n%!" (after_failed_exec 150_000_000);
  Unix.execv "/bin/echo" [| "/bin/echo"; "echo ran" |]
