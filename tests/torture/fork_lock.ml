(* fork_lock.ml — threads come and go all the time (the agent registers and
   arms each, under its locks) while another thread forks 60 times; in each
   child the forking thread does a little work and returns, which ends the
   child (status 0). A child must never hang on a lock some other thread of
   the parent held at the fork.
   torture-libs: unix threads *)
let[@inline never] spin n =
  let acc = ref 0 in
  for i = 1 to n do acc := (!acc + i) land 0xffff done;
  ignore (Sys.opaque_identity !acc)

let () =
  let stop = Atomic.make false in
  let churn () =
    while not (Atomic.get stop) do
      Thread.join (Thread.create (fun () -> spin 1000) ())
    done in
  let churners = List.init 3 (fun _ -> Thread.create churn ()) in
  let ok = ref 0 in
  for _ = 1 to 60 do
    let pid = ref 0 in
    let t = Thread.create (fun () ->
      match Unix.fork () with
      | 0 -> spin 100_000 (* the child's only thread returns: the child ends, status 0 *)
      | p -> pid := p) () in
    Thread.join t;
    match Unix.waitpid [] !pid with
    | _, Unix.WEXITED 0 -> incr ok
    | _ -> ()
  done;
  Atomic.set stop true;
  List.iter Thread.join churners;
  Printf.printf "children that ended with status 0: %d of 60\n" !ok
