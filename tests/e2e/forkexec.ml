(* forkexec.ml — e2e program: while doing its own work ([work_parent]) the
   program starts non-OCaml children three ways — Unix.create_process of
   /bin/sh -c 'echo hi | cat' with its output read through a pipe,
   create_process of /bin/true, and Unix.fork + execv of /bin/echo — and
   prints what they returned. The checker asserts the children behaved, the
   parent's profile is intact and no child wrote a profile.
   Usage: forkexec.exe [PERCENT]  (default 100 = ~2 s) *)

let[@inline never] work_parent n =
  let acc = ref 11 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

let status_string = function
  | Unix.WEXITED c -> Printf.sprintf "exit %d" c
  | Unix.WSIGNALED s -> Printf.sprintf "signal %d" s
  | Unix.WSTOPPED s -> Printf.sprintf "stopped %d" s

(* Runs argv with stdout captured; returns (first output line, status). *)
let run_captured prog argv =
  let r, w = Unix.pipe ~cloexec:true () in
  let pid = Unix.create_process prog argv Unix.stdin w Unix.stderr in
  Unix.close w;
  let ic = Unix.in_channel_of_descr r in
  let line = try input_line ic with End_of_file -> "<no output>" in
  close_in ic;
  let _, st = Unix.waitpid [] pid in
  (line, status_string st)

let fork_exec_echo () =
  match Unix.fork () with
  | 0 -> (try Unix.execv "/bin/echo" [| "/bin/echo"; "forked-child-ok" |] with _ -> exit 127)
  | pid -> let _, st = Unix.waitpid [] pid in status_string st

let () =
  let percent = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 100 in
  let n = 400_000_000 * percent / 100 in
  Printf.printf "forkexec: pid=%d\n%!" (Unix.getpid ());
  let acc = ref 0 in
  for round = 1 to 3 do
    acc := (!acc + work_parent n) land 0xffffff;
    let line, st = run_captured "/bin/sh" [| "/bin/sh"; "-c"; "echo hi | cat" |] in
    Printf.printf "round %d: sh said %S (%s)\n%!" round line st;
    let _, st = run_captured "/bin/true" [| "/bin/true" |] in
    Printf.printf "round %d: true %s\n%!" round st;
    let st = fork_exec_echo () in
    Printf.printf "round %d: fork+exec echo %s\n%!" round st
  done;
  acc := (!acc + work_parent n) land 0xffffff;
  Printf.printf "forkexec: result=%d\n" !acc
