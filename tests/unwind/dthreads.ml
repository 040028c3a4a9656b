(* tests/unwind/dthreads.ml — systhreads inside domains: two domains, each
   running three systhreads that take turns with Thread.yield (a
   cooperative server loop) around a Mutex-protected work queue and a
   Condition, plus the domains' own main threads doing the same.
   Usage: dthreads.exe [SCALE] *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 12000.))

let[@inline never] rec crunch n acc = if n = 0 then acc else crunch (n - 1) ((acc * 17 + n) land 0xfffff)

type shared = { m : Mutex.t; c : Condition.t; q : int Queue.t; mutable done_ : int }

let[@inline never] serve s id () =
  let acc = ref 0 in
  for i = 1 to rounds do
    Mutex.lock s.m;
    Queue.push (i + id) s.q;
    Condition.signal s.c;
    Mutex.unlock s.m;
    acc := crunch 2000 (!acc + i);
    Thread.yield ()
  done;
  Mutex.lock s.m; s.done_ <- s.done_ + 1; Condition.broadcast s.c; Mutex.unlock s.m;
  ignore (Sys.opaque_identity !acc)

let[@inline never] drain s nthreads =
  let sum = ref 0 in
  Mutex.lock s.m;
  while s.done_ < nthreads || not (Queue.is_empty s.q) do
    (match Queue.take_opt s.q with
     | Some v -> Mutex.unlock s.m; sum := !sum + crunch 500 v; Thread.yield (); Mutex.lock s.m
     | None -> Condition.wait s.c s.m)
  done;
  Mutex.unlock s.m;
  !sum

let[@inline never] domain_main k () =
  let s = { m = Mutex.create (); c = Condition.create (); q = Queue.create (); done_ = 0 } in
  let ts = List.init 3 (fun i -> Thread.create (serve s (k * 10 + i)) ()) in
  let r = drain s 3 in
  List.iter Thread.join ts;
  r

let () =
  let ds = List.init 2 (fun k -> Domain.spawn (domain_main (k + 1))) in
  let here = domain_main 0 () in
  let t = List.fold_left (fun a d -> a + Domain.join d) here ds in
  Printf.printf "dthreads: %d\n" (t land 0xffff)
