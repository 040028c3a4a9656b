(* tests/unwind/churn.ml — domains that come and go: a request loop that
   spawns a short-lived domain per batch (parse, sort, build a table) and
   joins it, while two long-lived domains keep the major GC busy (one
   allocates a churning cache, one calls Gc.major now and then, as a
   program that compacts its caches does).
   Usage: churn.exe [SCALE] *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let batches = max 1 (int_of_float (scale *. 30.))
let stop = Atomic.make false

let[@inline never] handle_batch seed =
  let lines = List.init 2000 (fun i -> Printf.sprintf "%d,%d,key%d" ((i * seed) mod 977) i (i mod 31)) in
  let rows = List.map (fun l -> match String.split_on_char ',' l with
      | [a; b; c] -> (int_of_string a, int_of_string b, c) | _ -> (0, 0, "")) lines in
  let sorted = List.sort compare rows in
  let t = Hashtbl.create 64 in
  List.iter (fun (a, _, c) -> Hashtbl.replace t c (a + try Hashtbl.find t c with Not_found -> 0)) sorted;
  Hashtbl.fold (fun _ v acc -> acc + v) t 0

let[@inline never] cache_churn () =
  let cache = Array.make 4096 [] in
  let i = ref 0 in
  while not (Atomic.get stop) do
    cache.(!i land 4095) <- List.init 20 (fun k -> string_of_int (k + !i));
    incr i
  done;
  !i

let[@inline never] compactor () =
  let n = ref 0 in
  while not (Atomic.get stop) do
    let junk = Array.init 20_000 (fun i -> Some i) in
    ignore (Sys.opaque_identity junk);
    Gc.major ();
    incr n
  done;
  !n

let () =
  let bg1 = Domain.spawn cache_churn and bg2 = Domain.spawn compactor in
  let total = ref 0 in
  for b = 1 to batches do
    let d = Domain.spawn (fun () -> handle_batch b) in
    total := !total + Domain.join d
  done;
  Atomic.set stop true;
  let c1 = Domain.join bg1 and c2 = Domain.join bg2 in
  Printf.printf "churn: %d %b\n" (!total land 0xffff) (c1 + c2 > 0)
