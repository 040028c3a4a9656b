(* forkwork.ml — e2e program: a parent that forks three workers, as a
   process pool does (Unix.fork without exec), while it works itself.
   Each worker spends its CPU in [child_work] (~0.3 s) and ends its own
   way: exit 0, Unix._exit 0, or its only thread (a systhread that forked)
   returning. The parent spends its own in [parent_work], runs one
   Unix.system "true" (a fork and exec), waits for the workers and prints
   how each ended. The checker asserts every worker wrote a profile of its
   own work and nothing of the parent's, and the fork and exec none.
   With "daemon": the parent forks one worker that leaves its session
   (setsid) and outlives it, and exits at once; the worker does its work,
   then writes "done" to the file named by the second argument.
   With "chdir DIR": the parent first moves into DIR (as a server or a
   build step does), so that a relative profile name given before it
   moved must not follow it there.
   Usage: forkwork.exe [daemon FILE | chdir DIR] *)

let[@inline never] spin n seed =
  let acc = ref seed in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

(* Not tail calls: the work functions stay on the stack under [spin]. *)
let[@inline never] child_work k = spin 160_000_000 k + 1
let[@inline never] parent_work () = spin 160_000_000 7 + 1

let status = function
  | Unix.WEXITED c -> Printf.sprintf "exit %d" c
  | Unix.WSIGNALED s -> Printf.sprintf "signal %d" s
  | Unix.WSTOPPED s -> Printf.sprintf "stopped %d" s

let worker k () =
  let r = child_work k in
  Printf.printf "worker %d pid=%d (%d)\n%!" k (Unix.getpid ()) (r land 1)

(* The parent waits for a byte the worker sends once it runs (as a
   daemon's parent waits for it to be ready): by then fork has returned in
   the worker, and its profile exists. *)
let daemon file =
  let r, w = Unix.pipe () in
  match Unix.fork () with
  | 0 ->
    Unix.close r;
    ignore (Unix.setsid ());
    ignore (Unix.write_substring w "r" 0 1);
    Unix.close w;
    let x = child_work 3 in
    let oc = open_out file in
    Printf.fprintf oc "done %d\n" (x land 1);
    close_out oc
  | pid ->
    Unix.close w;
    ignore (Unix.read r (Bytes.create 1) 0 1);
    Printf.printf "parent left worker pid=%d\n%!" pid

let () =
  if Array.length Sys.argv > 2 && Sys.argv.(1) = "daemon" then (daemon Sys.argv.(2); exit 0);
  if Array.length Sys.argv > 2 && Sys.argv.(1) = "chdir" then begin
    Sys.chdir Sys.argv.(2);
    Printf.printf "moved to %s\n%!" (Sys.getcwd ())
  end;
  let forked = ref [] in
  for k = 0 to 2 do
    let fork_here () =
      match Unix.fork () with
      | 0 ->
        worker k ();
        (match k with 0 -> exit 0 | 1 -> Unix._exit 0 | _ -> ())
      | pid -> forked := pid :: !forked in
    if k = 2 then Thread.join (Thread.create fork_here ()) else fork_here ()
  done;
  let r = parent_work () in
  let sys = Unix.system "true" in
  List.iter (fun pid -> let _, st = Unix.waitpid [] pid in
              Printf.printf "worker pid=%d ended: %s\n%!" pid (status st)) (List.rev !forked);
  Printf.printf "parent pid=%d system: %s (%d)\n%!" (Unix.getpid ()) (status sys) (r land 1)
