(* tests/unwind/atomq.ml — a lock-free Michael-Scott queue over Atomic,
   pushed and popped by three domains (compare_and_set, exchange,
   fetch_and_add: OCaml 5 calls them as noalloc runtime primitives on the C
   stack), plus a counter. Written the way such code is in the wild.
   Usage: atomq.exe [SCALE] *)

type 'a node = { value : 'a option; next : 'a node option Atomic.t }
type 'a t = { head : 'a node Atomic.t; tail : 'a node Atomic.t }

let create () =
  let dummy = { value = None; next = Atomic.make None } in
  { head = Atomic.make dummy; tail = Atomic.make dummy }

let rec push q v =
  let node = { value = Some v; next = Atomic.make None } in
  let tail = Atomic.get q.tail in
  match Atomic.get tail.next with
  | None ->
      if Atomic.compare_and_set tail.next None (Some node) then
        ignore (Atomic.compare_and_set q.tail tail node)
      else push q v
  | Some nxt ->
      ignore (Atomic.compare_and_set q.tail tail nxt);
      push q v

let rec pop q =
  let head = Atomic.get q.head in
  match Atomic.get head.next with
  | None -> None
  | Some nxt ->
      if Atomic.compare_and_set q.head head nxt then nxt.value else pop q

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 1_200_000.))
let counter = Atomic.make 0
let last = Atomic.make 0

let[@inline never] producer q n =
  for i = 1 to n do
    push q i;
    ignore (Atomic.fetch_and_add counter 1)
  done

let[@inline never] consumer q n =
  let got = ref 0 and sum = ref 0 in
  while !got < n do
    match pop q with
    | Some v -> incr got; sum := !sum + v; ignore (Atomic.exchange last v)
    | None -> Domain.cpu_relax ()
  done;
  !sum

let () =
  let q = create () in
  let p1 = Domain.spawn (fun () -> producer q rounds) in
  let p2 = Domain.spawn (fun () -> producer q rounds) in
  let s = consumer q (2 * rounds) in
  Domain.join p1;
  Domain.join p2;
  Printf.printf "atomq: %d %d\n" (s land 0xffff) (Atomic.get counter)
