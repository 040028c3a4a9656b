(* effects.ml — e2e program: a round-robin scheduler of fibers built on
   Effect.Deep. Each fiber runs [compute], which performs [Yield] every few
   thousand iterations; [run_scheduler] installs the handler (match_with) and
   resumes the fibers in turn with [continue]. While a fiber computes, its frame
   chain must lead through the resumer back to [run_scheduler] and [main]; the
   checker asserts that for the samples in [compute].
   Usage: effects.exe [PERCENT]  (default 100 = ~3 s) *)

open Effect
open Effect.Deep

type _ Effect.t += Yield : unit Effect.t

type status = Done of int | Paused of (unit, status) continuation

let[@inline never] compute seed steps =
  let acc = ref seed in
  for i = 1 to steps do
    acc := (!acc * 1103515245 + i) land 0x3fffffff;
    if i land 4095 = 0 then perform Yield
  done;
  !acc

(* Starts a fiber under the handler: the handler returns [Paused k] to the
   scheduler loop instead of resuming in place, so the parent stack stays flat. *)
let[@inline never] start f =
  match_with f ()
    { retc = (fun r -> Done r);
      exnc = raise;
      effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Yield -> Some (fun (k : (a, status) continuation) -> Paused k)
        | _ -> None) }

let[@inline never] run_scheduler nfibers steps =
  let q = Queue.create () in
  for f = 1 to nfibers do
    Queue.push (start (fun () -> compute f steps)) q
  done;
  let total = ref 0 and switches = ref 0 in
  while not (Queue.is_empty q) do
    match Queue.pop q with
    | Done r -> total := (!total + r) land 0xffffff
    | Paused k -> incr switches; Queue.push (continue k ()) q
  done;
  (!total, !switches)

let () =
  let percent = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 100 in
  let total, switches = run_scheduler 4 (2_200_000_000 / 4 * percent / 100) in
  Printf.printf "effects: result=%d switches=%d\n" total switches
