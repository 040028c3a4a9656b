(* tests/fidelity/steal.ml — a work-stealing pool over 2 domains whose tasks
   suspend (Effect.Deep Yield) and are resumed by the other domain: a task's
   continuation is always pushed to the other worker's queue, and an idle
   worker steals from its neighbour. Checked by test_fidelity.py: stacks on both
   domains reach their thread's root.
   Usage: steal.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

open Effect
open Effect.Deep

type _ Effect.t += Yield : unit Effect.t

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))
let workers = 2
let ntasks = 64

type job = Task of int | Resume of (unit, unit) continuation

let queues = Array.init workers (fun _ -> Queue.create ())
let locks = Array.init workers (fun _ -> Mutex.create ())
let finished = Atomic.make 0
let migrations = Atomic.make 0

let push w j = Mutex.protect locks.(w) (fun () -> Queue.push j queues.(w))
let pop w = Mutex.protect locks.(w) (fun () -> Queue.take_opt queues.(w))

let[@inline never] crunch seed =
  let acc = ref seed in
  for i = 1 to 100_000 do
    acc := (!acc * 17) + i
  done;
  !acc

(* Each task works in slices and yields between them. *)
let[@inline never] task id () =
  let acc = ref id in
  for _ = 1 to scaled 250 do
    acc := crunch !acc;
    perform Yield
  done;
  ignore (Sys.opaque_identity !acc);
  Atomic.incr finished

(* The handler sends the suspended task to the other worker. *)
let[@inline never] run_job me j =
  let other = (me + 1) mod workers in
  let on_yield (type a) (e : a Effect.t) =
    match e with
    | Yield -> Some (fun (k : (a, unit) continuation) -> Atomic.incr migrations; push other (Resume k))
    | _ -> None
  in
  match j with
  | Task id -> match_with (task id) () { retc = (fun () -> ()); exnc = raise; effc = on_yield }
  | Resume k -> continue k ()

let[@inline never] worker me () =
  let other = (me + 1) mod workers in
  while Atomic.get finished < ntasks do
    match pop me with
    | Some j -> run_job me j
    | None -> (
        match pop other with Some j -> run_job me j | None -> Domain.cpu_relax ())
  done

let () =
  for i = 0 to ntasks - 1 do push (i mod workers) (Task i) done;
  let d = Domain.spawn (worker 1) in
  worker 0 ();
  Domain.join d;
  Printf.printf "steal: %d tasks, %d migrations, cpu %.3f\n" (Atomic.get finished)
    (Atomic.get migrations) (Sys.time ())
