(* tests/engine/handoff.ml — systhreads that hand the runtime lock to each
   other after every short piece of work (a cooperative server's
   Thread.yield), a mutex-guarded total between them: a thread switch every
   few tens of microseconds of CPU. Work and the hand-off are separate
   functions, so a profile's leaves say how the CPU time splits.
   Usage: handoff.exe [SCALE] *)

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

let[@inline never] serve id () =
  for i = 1 to steps do
    hand_off (work 10000 (id * i))
  done

let () =
  let others = List.init 3 (fun id -> Thread.create (serve (id + 1)) ()) in
  serve 0 ();
  List.iter Thread.join others;
  Printf.printf "handoff: total %d\n" (!total land 0xffff)
