(* forkexec.ml — fork + exec of non-OCaml programs, an OCaml fork child that
   works and exits, and create_process, in a loop.
   torture-libs: unix *)
let[@inline never] work n =
  let acc = ref 3 in
  for i = 1 to n do acc := (!acc * 13 + i) land 0xffffff done;
  !acc

let status = function
  | Unix.WEXITED c -> Printf.sprintf "exit %d" c
  | Unix.WSIGNALED s -> Printf.sprintf "signal %d" s
  | Unix.WSTOPPED s -> Printf.sprintf "stopped %d" s

let () =
  for r = 1 to 10 do
    let v = work 3_000_000 in
    (match Unix.fork () with
     | 0 -> (try Unix.execv "/bin/true" [| "/bin/true" |] with _ -> exit 127)
     | pid -> let _, st = Unix.waitpid [] pid in Printf.printf "%d exec true: %s\n%!" r (status st));
    (match Unix.fork () with
     | 0 -> exit (work 1_000_000 land 0x3f)
     | pid -> let _, st = Unix.waitpid [] pid in Printf.printf "%d child: %s\n%!" r (status st));
    let pid = Unix.create_process "/bin/sh" [| "/bin/sh"; "-c"; "exit 4" |] Unix.stdin Unix.stdout Unix.stderr in
    let _, st = Unix.waitpid [] pid in
    Printf.printf "%d sh: %s (%d)\n%!" r (status st) v
  done
