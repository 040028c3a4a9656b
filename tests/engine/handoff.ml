(* tests/engine/handoff.ml — systhreads that hand the runtime lock to each
   other after every short piece of work (a cooperative server's
   Thread.yield), a mutex-guarded total between them: a thread switch every
   few tens of microseconds of CPU. Work and the hand-off are separate
   functions, so a profile's leaves say how the CPU time splits; each
   thread measures its time in work and its whole time in serve with its
   CPU clock, and the program prints work's share of the latter ("own:
   work N%").
   Usage: handoff.exe [SCALE] *)

external thread_cputime : unit -> float = "fid_thread_cputime"

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let steps = max 1 (int_of_float (scale *. 8000.))
let lock = Mutex.create ()
let total = ref 0

let[@inline never] rec work k acc = if k = 0 then acc else work (k - 1) ((acc lxor (k * 31)) land 0xffffff)

let[@inline never] hand_off v =
  Mutex.lock lock;
  total := !total + v;
  Mutex.unlock lock;
  Thread.yield ()

(* CPU seconds each thread spent in work and in all of serve. *)
let in_work = Array.make 4 0. and in_serve = Array.make 4 0.

let[@inline never] serve id () =
  let start = thread_cputime () in
  for i = 1 to steps do
    let t0 = thread_cputime () in
    let v = work 10000 (id * i) in
    in_work.(id) <- in_work.(id) +. (thread_cputime () -. t0);
    hand_off v
  done;
  in_serve.(id) <- thread_cputime () -. start

let () =
  let others = List.init 3 (fun id -> Thread.create (serve (id + 1)) ()) in
  serve 0 ();
  List.iter Thread.join others;
  let w = Array.fold_left ( +. ) 0. in_work and all = Array.fold_left ( +. ) 0. in_serve in
  Printf.printf "handoff: total %d own: work %.1f%% of %.3f s\n" (!total land 0xffff)
    (if all > 0. then 100. *. w /. all else 0.) all
