(* tests/fidelity/sched.ml — a round-robin scheduler of fibers (Effect.Deep)
   that perform Yield after every small slice of computation, so the CPU
   keeps crossing fiber switches. Checked by test_fidelity.py: stacks reach _start and
   the fibers' [compute] frames link back to [scheduler].
   Usage: sched.exe [SCALE]  (SCALE multiplies the amount of work; default 1) *)

open Effect
open Effect.Deep

type _ Effect.t += Yield : unit Effect.t

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let scaled n = max 1 (int_of_float (scale *. float_of_int n))

type status = Done | Yielded of (unit, status) continuation

(* One slice of work between two yields (a few microseconds). *)
let[@inline never] compute seed =
  let acc = ref seed in
  for i = 1 to 2_000 do
    acc := (!acc * 31) + i
  done;
  !acc

let[@inline never] fiber_body id () =
  let acc = ref id in
  for _ = 1 to scaled 70_000 do
    acc := compute !acc;
    perform Yield
  done;
  ignore (Sys.opaque_identity !acc)

(* Runs [f] under the handler that turns Yield into a [Yielded k] result. *)
let[@inline never] start f =
  match_with f ()
    { retc = (fun () -> Done);
      exnc = raise;
      effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Yield -> Some (fun (k : (a, status) continuation) -> Yielded k)
        | _ -> None) }

type job = Start of (unit -> unit) | Resume of (unit, status) continuation

let[@inline never] scheduler jobs =
  let q = Queue.of_seq (List.to_seq jobs) in
  let switches = ref 0 in
  while not (Queue.is_empty q) do
    let st = match Queue.pop q with Start f -> start f | Resume k -> continue k () in
    incr switches;
    match st with Done -> () | Yielded k -> Queue.push (Resume k) q
  done;
  !switches

let () =
  let n = scheduler (List.init 8 (fun i -> Start (fiber_body i))) in
  Printf.printf "sched: %d switches cpu %.3f\n" n (Sys.time ())
