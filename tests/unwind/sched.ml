(* tests/unwind/sched.ml — a cooperative scheduler in the style of Eio or
   Affect: fibers (Fork, Yield, blocking on a channel: Await) under one deep
   handler, a run queue of continuations, bounded channels between producer
   and consumer fibers, cancellation of the slow ones with discontinue, and
   a generator built from effects (Seq from an iterator) inside each fiber.
   Usage: sched.exe [SCALE] *)

open Effect
open Effect.Deep

type _ Effect.t += Fork : (unit -> unit) -> unit Effect.t
type _ Effect.t += Yield : unit Effect.t
type _ Effect.t += Suspend : ((unit -> unit) -> unit) -> unit Effect.t

exception Cancelled

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 1200.))

(* A bounded channel whose readers and writers suspend. *)
type 'a chan = { buf : 'a Queue.t; cap : int; readers : (unit -> unit) Queue.t;
                 writers : (unit -> unit) Queue.t }

let chan cap = { buf = Queue.create (); cap; readers = Queue.create (); writers = Queue.create () }
let wake q = match Queue.take_opt q with Some f -> f () | None -> ()

let rec send c v =
  if Queue.length c.buf >= c.cap then (perform (Suspend (fun k -> Queue.push k c.writers)); send c v)
  else (Queue.push v c.buf; wake c.readers)

let rec recv c =
  match Queue.take_opt c.buf with
  | Some v -> wake c.writers; v
  | None -> perform (Suspend (fun k -> Queue.push k c.readers)); recv c

(* Generators: an iterator turned into a Seq by an effect. *)
let to_seq (type a) (iter : (a -> unit) -> unit) : a Seq.t =
  let module M = struct type _ Effect.t += Next : a -> unit Effect.t end in
  let rec run () =
    match_with iter (fun x -> perform (M.Next x))
      { retc = (fun () -> Seq.Nil); exnc = raise;
        effc = (fun (type b) (e : b Effect.t) -> match e with
          | M.Next x -> Some (fun (k : (b, _) continuation) -> Seq.Cons (x, fun () -> continue k ()))
          | _ -> None) } in
  run

let[@inline never] rec crunch n acc = if n = 0 then acc else crunch (n - 1) ((acc * 31 + n) land 0xffffff)

let[@inline never] producer c id () =
  let items = to_seq (fun yield -> for i = 1 to 200 do yield (crunch 400 (id + i)) done) in
  Seq.iter (fun v -> send c v; if v land 7 = 0 then perform Yield) items;
  send c (-1)

let[@inline never] consumer c total () =
  let rec loop () = let v = recv c in if v >= 0 then (total := !total + crunch 200 v; loop ()) in
  loop ()

let[@inline never] sleeper () =
  (* Waits forever on a channel nobody writes: cancelled at the end. *)
  ignore (recv (chan 1) : int)

let[@inline never] run main =
  let q = Queue.create () in
  let blocked = ref [] in
  let rec spawn f =
    match_with f ()
      { retc = (fun () -> ()); exnc = (function Cancelled -> () | e -> raise e);
        effc = (fun (type a) (e : a Effect.t) -> match e with
          | Fork g -> Some (fun (k : (a, unit) continuation) ->
              Queue.push (fun () -> continue k ()) q; spawn g)
          | Yield -> Some (fun (k : (a, unit) continuation) -> Queue.push (fun () -> continue k ()) q)
          | Suspend reg -> Some (fun (k : (a, unit) continuation) ->
              let woken = ref false in
              blocked := (woken, fun ex -> discontinue k ex) :: !blocked;
              reg (fun () -> woken := true; Queue.push (fun () -> continue k ()) q))
          | _ -> None) } in
  spawn main;
  while not (Queue.is_empty q) do (Queue.pop q) () done;
  (* What is still blocked is cancelled. *)
  List.iter (fun (w, cancel) -> if not !w then cancel Cancelled) !blocked

let () =
  let total = ref 0 in
  for r = 1 to rounds do
    run (fun () ->
        let c = chan 8 in
        perform (Fork sleeper);
        for p = 1 to 3 do perform (Fork (producer c (r * 10 + p))) done;
        for _ = 1 to 3 do perform (Fork (consumer c total)) done)
  done;
  Printf.printf "sched: %d\n" (!total land 0xffff)
